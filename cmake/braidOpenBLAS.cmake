# The BLAS braid links: the OpenMP build of OpenBLAS, whichever OpenBLAS the
# system's default (Debian's libblas/libopenblas alternatives) points to.
#
# Why: braid's own loops run on OpenMP (libgomp). With the pthread build of
# OpenBLAS (Debian's default alternative) a process has two pools of
# spinning worker threads, and on a machine with few cores they take the
# cores from each other: `braid train mlp --threads 2` ran at less than half
# the speed of --threads 1. With the OpenMP build, OpenBLAS's parallel
# regions run on the same libgomp team as braid's, and a GEMM called inside
# one of braid's parallel loops runs single-threaded.
#
# Defines the imported target braid::openblas_openmp: the library by full
# path, so executables get its directory in their run path (RUNPATH, searched
# before the loader's cache) and load it even though the soname,
# libopenblas.so.0, is the same as the system default's. Used by braid's own
# build and by braidConfig.cmake, so a find_package(braid) consumer links the
# same library. tests/tensor/threads_test.cc checks the result at run time.
#
# Debian: libopenblas-openmp-dev (scripts/deps.sh installs it). Elsewhere,
# point BRAID_OPENBLAS_OPENMP_DIR at a directory holding an OpenMP build
# (libopenblas.so or Fedora's libopenblaso.so) and its cblas.h.
if(TARGET braid::openblas_openmp)
  return()
endif()

set(_braid_blas_arch "${CMAKE_LIBRARY_ARCHITECTURE}")
if(NOT _braid_blas_arch)
  set(_braid_blas_arch "${CMAKE_SYSTEM_PROCESSOR}-linux-gnu")
endif()
set(BRAID_OPENBLAS_OPENMP_DIR "" CACHE PATH "directory of an OpenMP build of OpenBLAS")
find_library(BRAID_OPENBLAS_OPENMP_LIBRARY
  NAMES openblas openblaso
  HINTS ${BRAID_OPENBLAS_OPENMP_DIR}
  PATHS /usr/lib/${_braid_blas_arch}/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT BRAID_OPENBLAS_OPENMP_LIBRARY)
  # Fedora and friends name the OpenMP build libopenblaso.
  find_library(BRAID_OPENBLAS_OPENMP_LIBRARY NAMES openblaso)
endif()
find_path(BRAID_OPENBLAS_OPENMP_INCLUDE_DIR cblas.h
  HINTS ${BRAID_OPENBLAS_OPENMP_DIR} ${BRAID_OPENBLAS_OPENMP_DIR}/include
  PATHS /usr/include/${_braid_blas_arch}/openblas-openmp /usr/include/openblas
  NO_DEFAULT_PATH)
if(NOT BRAID_OPENBLAS_OPENMP_LIBRARY OR NOT BRAID_OPENBLAS_OPENMP_INCLUDE_DIR)
  message(FATAL_ERROR
    "braid needs the OpenMP build of OpenBLAS (one thread pool for braid's loops and the BLAS; "
    "see cmake/braidOpenBLAS.cmake). On Debian: apt-get install libopenblas-openmp-dev "
    "(scripts/deps.sh does); elsewhere set BRAID_OPENBLAS_OPENMP_DIR.")
endif()

add_library(braid::openblas_openmp SHARED IMPORTED)
set_target_properties(braid::openblas_openmp PROPERTIES
  IMPORTED_LOCATION "${BRAID_OPENBLAS_OPENMP_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${BRAID_OPENBLAS_OPENMP_INCLUDE_DIR}")
unset(_braid_blas_arch)
