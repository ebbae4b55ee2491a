// Boost.Test's framework, header-only (its `included` variant), without a main: linked by
// pytest-ondevice into a Boost.Test binary whose source does not include it. A source built
// for the shared library (BOOST_TEST_DYN_LINK) calls its entry point with the other init
// function's type: boosttest_framework_dyn.cpp is this for it.
#if !defined(__cpp_exceptions) && !defined(__EXCEPTIONS)
#error "Boost.Test's framework needs C++ exceptions, and this board compiles with -fno-exceptions: add cxxflags = ['-fexceptions'] to ondevice.toml"
#endif
#if defined(BOOST_TEST_DYN_LINK) || defined(BOOST_ALL_DYN_LINK)
#define BOOST_TEST_ALTERNATIVE_INIT_API  // `bool init_unit_test()`, as the dynamic library's callers have it
#endif
#define BOOST_TEST_NO_MAIN
#include <boost/test/included/unit_test.hpp>
