#ifndef TANDEM_CQRENCODE_SHIM_H
#define TANDEM_CQRENCODE_SHIM_H
// libqrencode (QR code encoding: Reed-Solomon error correction, the eight masks and their penalty
// scores, version selection) for Swift: the C API is used as is; the logic is in TandemSheet.
#include <qrencode.h>
#endif
