#include "check.h"
int main(void) { CHECK_DONE(); }
