// The data sets' files as braid reads them: gzip (src/nn/gunzip.h, zlib
// underneath: every member, the trailer's CRC and size) and Fashion-MNIST's
// idx files (their headers, sizes and labels, checked by the FashionMnist
// constructor, braid/data.h). Input: a u16 length, that many bytes of the
// images file, the rest the labels file; each is written to a scratch
// directory under /dev/shm (a gzip one as <name>.gz, as the data set
// ships) and the constructor reads them from there, as it reads the
// installed data set.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "braid/data.h"
#include "braid/error.h"
#include "fuzz_target.h"
#include "nn/gunzip.h"

namespace {

void write_file(const std::filesystem::path& p, const uint8_t* data, size_t n) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(n));
}

bool gz(const uint8_t* data, size_t n) { return n >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

}  // namespace

BRAID_FUZZ_TARGET(dataset) {
  namespace fs = std::filesystem;
  static const fs::path dir = "/dev/shm/braid-fuzz-dataset-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  uint16_t len = 0;
  if (size >= 2) std::memcpy(&len, data, 2);
  const size_t body = size >= 2 ? size - 2 : 0;
  const uint8_t* images = data + (size >= 2 ? 2 : size);
  const size_t ni = std::min<size_t>(len, body);
  const uint8_t* labels = images + ni;
  const size_t nl = body - ni;
  write_file(dir / (gz(images, ni) ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte"), images, ni);
  write_file(dir / (gz(labels, nl) ? "train-labels-idx1-ubyte.gz" : "train-labels-idx1-ubyte"), labels, nl);
  try {
    braid::nn::FashionMnist d("train", dir.string());
    (void)d.size();
  } catch (const braid::Error&) {
  }
  fs::remove_all(dir);
}
