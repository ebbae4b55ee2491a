// Boost.Test's framework for a source written for its shared library (it defines
// BOOST_TEST_DYN_LINK): the same framework, header-only, entered as that library is.
#define BOOST_TEST_DYN_LINK
#include "boosttest_framework.cpp"
