// Boost.Test's usual main, linked by pytest-ondevice when a test source defines its module
// (BOOST_TEST_MODULE, whose init function it then holds) but no main: the framework's
// static library would have given it.
#include <boost/test/unit_test.hpp>

#if defined(BOOST_TEST_DYN_LINK) && defined(BOOST_TEST_MAIN) && !defined(BOOST_TEST_NO_MAIN)
// unit_test.hpp defined it (a build for the shared library, BOOST_TEST_DYN_LINK on the command line)
#elif defined(BOOST_TEST_ALTERNATIVE_INIT_API)
bool init_unit_test();
int main(int argc, char *argv[]) { return boost::unit_test::unit_test_main(&init_unit_test, argc, argv); }
#else
boost::unit_test::test_suite *init_unit_test_suite(int argc, char *argv[]);
int main(int argc, char *argv[]) { return boost::unit_test::unit_test_main(&init_unit_test_suite, argc, argv); }
#endif
