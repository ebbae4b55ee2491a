// As TFLM writes its decompress_test.cc: the whole file, main included, exists only when
// compression is built in, so without USE_TFLM_COMPRESSION there is nothing to link.
#ifdef USE_TFLM_COMPRESSION

#include "tensorflow/lite/micro/testing/micro_test_v2.h"

TEST(DecompressTest, TestInt8) { EXPECT_EQ(1, 1); }
TEST(DecompressTest, TestFloat) { EXPECT_EQ(2, 2); }

TF_LITE_MICRO_TESTS_MAIN

#endif  // USE_TFLM_COMPRESSION
