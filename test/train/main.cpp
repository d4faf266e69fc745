#define BOOST_TEST_MODULE ringtrain_train
#include <boost/test/unit_test.hpp>
