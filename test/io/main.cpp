#define BOOST_TEST_MODULE ringtrain_io
#include <boost/test/unit_test.hpp>
