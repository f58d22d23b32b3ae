// Placeholder until this subcommand lands; owned by the work on it.
#include <cstdio>
#include "subcommands.h"
namespace braid::tool {
int bench_main(int, char**) {
  std::fprintf(stderr, "braid bench: not built yet\n");
  return 2;
}
}  // namespace braid::tool
