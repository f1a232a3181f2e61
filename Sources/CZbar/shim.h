#ifndef TANDEM_CZBAR_SHIM_H
#define TANDEM_CZBAR_SHIM_H
// zbar (QR code decoding) for Swift: the C API is used as is; the logic is in TandemMedia/QR.
#include <zbar.h>
#endif
