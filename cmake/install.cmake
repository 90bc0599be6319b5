# Installing tpcc as a tool, and its Debian package (CPack).
#
#   cmake --install build --prefix P      P/bin/{tpcc,tprun}
#                                         P/lib/tpcc/tprun_cuda.so (CUDA builds; LIBDIR)
#                                         P/share/tpcc/models/*.model
#                                         P/share/tpcc/plans/*.plan
#                                         P/share/man/man1/{tpcc,tprun}.1
#                                         P/share/doc/tpcc/README.md, P/share/doc/tpcc/docs/*.md
#   cd build && cpack -G DEB              tpcc_VERSION_ARCH.deb (tools/package.sh)
#
# Plans name their model as "../models/x.model", relative to the plan, so
# the installed plans find the installed models as the source tree's do;
# a plan elsewhere finds them by file name (compiler/driver/model_path.c).
# Tests are never installed: -DTPCC_TESTS=OFF builds and installs without
# GoogleTest or NumPy.
include(GNUInstallDirs)
# Installing never builds: `cmake --build` first. Otherwise cpack (which
# installs through the build's preinstall target) would rebuild out-of-date
# targets, relinking tpcc under a running test suite (Install.DebianPackage).
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

install(TARGETS tpcc tprun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET tprun_cuda)
  # the CUDA backend module, where tprun looks for it (runtime/CMakeLists.txt)
  install(TARGETS tprun_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/tpcc)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tpcc/models
        FILES_MATCHING PATTERN "*.model")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/plans/ DESTINATION ${CMAKE_INSTALL_DATADIR}/tpcc/plans
        FILES_MATCHING PATTERN "*.plan")
install(FILES ${PROJECT_SOURCE_DIR}/man/tpcc.1 ${PROJECT_SOURCE_DIR}/man/tprun.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "*.svg" PATTERN "*.yml")

# ---- the Debian package ---------------------------------------------------
# Depends names the Debian 12 packages of the libraries tpcc and tprun
# link (dpkg -S on ldd's list): libc6, libjansson4, libmpich12, and
# OpenBLAS, whose libopenblas.so.0 any of the libopenblas0-* variants
# provides; mpich for the mpiexec that `tprun -n` launches. A build with
# the CUDA backend also installs its module, which links the CUDA runtime,
# cuBLAS and NCCL, NVIDIA's packages, not Debian's: tools/package.sh builds
# the package with -DTPCC_CUDA=OFF.
set(CPACK_PACKAGE_NAME tpcc)
set(CPACK_PACKAGE_VENDOR "tpcc")
set(CPACK_PACKAGE_CONTACT "tpcc maintainers <tpcc@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "tensor-parallel plan compiler (tpcc) and runtime (tprun)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6 (>= 2.34), libjansson4 (>= 2.14), libmpich12 (>= 4.0), mpich, libopenblas0 | libopenblas0-pthread | libopenblas0-openmp | libopenblas0-serial")
if(TPCC_CUDA)
  set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
      "Checks PyTorch tensor-parallel plans and compiles them to per-rank schedules.\nThis build's CUDA backend (lib/tpcc/tprun_cuda.so) links the CUDA runtime, cuBLAS and NCCL, which Depends does not name.")
else()
  set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
      "Checks PyTorch tensor-parallel plans and compiles them to per-rank schedules.")
endif()
set(CPACK_GENERATOR DEB)
include(CPack)
