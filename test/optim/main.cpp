#define BOOST_TEST_MODULE ringtrain_optim
#include <boost/test/unit_test.hpp>
