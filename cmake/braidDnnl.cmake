# oneDNN (libdnnl), which runs braid's bf16 GEMMs (src/tensor/bf16_gemm.cc
# says why it). Found by library and header rather than through oneDNN's
# own package config: Debian 12's dnnl-config.cmake requires OpenCL's
# development files, which braid does not use.
#
# Defines the imported target braid::dnnl. Used by braid's build and by
# braidConfig.cmake. Debian: libdnnl-dev (scripts/deps.sh installs it).
if(TARGET braid::dnnl)
  return()
endif()
find_library(BRAID_DNNL_LIBRARY NAMES dnnl)
find_path(BRAID_DNNL_INCLUDE_DIR dnnl.hpp)
if(NOT BRAID_DNNL_LIBRARY OR NOT BRAID_DNNL_INCLUDE_DIR)
  message(FATAL_ERROR "braid needs oneDNN for its bf16 GEMMs. On Debian: apt-get install "
                      "libdnnl-dev (scripts/deps.sh does).")
endif()
add_library(braid::dnnl UNKNOWN IMPORTED)
set_target_properties(braid::dnnl PROPERTIES
  IMPORTED_LOCATION "${BRAID_DNNL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${BRAID_DNNL_INCLUDE_DIR}")
