#define BOOST_TEST_MODULE ringtrain_data
#include <boost/test/unit_test.hpp>
