#ifndef TANDEM_CZSTD_SHIM_H
#define TANDEM_CZSTD_SHIM_H
#include <zstd.h>
#endif
