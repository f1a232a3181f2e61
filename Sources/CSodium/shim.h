#ifndef TANDEM_CSODIUM_SHIM_H
#define TANDEM_CSODIUM_SHIM_H
#include <sodium.h>
#endif
