/* Kept so that board files naming it still build: the code is shared by every arch. */
#include "../common/semihosting.c"
