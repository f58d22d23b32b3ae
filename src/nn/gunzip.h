// Internal: gzip decoding (zlib) for the data sets' .gz files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::nn {

// Decompresses every gzip member of `in`. Throws Error(kCorrupt) naming
// `what` on malformed or truncated input or a CRC/size mismatch.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& what);

// Reads a whole file; when its name ends in ".gz" (or it starts with the
// gzip magic) it is decompressed. Throws Error(kIo) naming the path.
std::vector<uint8_t> read_file_maybe_gz(const std::string& path);

}  // namespace braid::nn
