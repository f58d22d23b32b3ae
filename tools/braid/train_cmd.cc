// Placeholder until this subcommand lands; owned by the work on it.
#include <cstdio>
#include "subcommands.h"
namespace braid::tool {
int train_main(int, char**) {
  std::fprintf(stderr, "braid train: not built yet\n");
  return 2;
}
}  // namespace braid::tool
