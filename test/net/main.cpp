#define BOOST_TEST_MODULE ringtrain_net
#include <boost/test/unit_test.hpp>
