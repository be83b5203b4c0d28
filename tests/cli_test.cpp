#define BOOST_TEST_MODULE cli_test
#include <boost/test/unit_test.hpp>
BOOST_AUTO_TEST_CASE(placeholder) {}
