#define BOOST_TEST_MODULE ringtrain_kernels
#include <boost/test/unit_test.hpp>
