// placeholder: implemented in progress
#include <gtest/gtest.h>
