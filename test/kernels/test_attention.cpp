// Sliding-window attention: gradient checks and reference comparisons go here.
#include <boost/test/unit_test.hpp>
