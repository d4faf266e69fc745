#define BOOST_TEST_MODULE ringtrain_model
#include <boost/test/unit_test.hpp>
