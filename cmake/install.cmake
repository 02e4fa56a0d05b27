# Installation (cmake --install BUILD [--prefix P]), GNUInstallDirs folders:
#
#   <bindir>/oar                    the command line (liboar linked statically)
#   <libdir>/liboar.so*, liboar.a   the library, shared and static
#   <libdir>/liboar_mpi.so          the MPI transport (OAR_WITH_MPI), opened by oar_dist_init
#   <libdir>/oar/plugins/*.so       the device plugins (plugins/*/CMakeLists.txt)
#   <includedir>/oar/*.h            the public headers
#   <libdir>/pkgconfig/oar.pc       pkg-config; --static: what liboar.a needs
#   <libdir>/cmake/oar/             find_package(oar): oar::oar (shared), oar::oar_static
#
# Nothing installed needs an environment variable: liboar finds its MPI
# module and plugins next to itself (src/core/self_dir.c), and programs
# linked through oar.pc or the CMake package find liboar by their run path.
# The test: tests/install/install_test.sh (CTest "install").

include(CMakePackageConfigHelpers)

# Run paths: liboar, its MPI module and the command line keep the folders
# of what they link that the system does not search (OpenBLAS's
# openblas-openmp folder here), as in the build tree, so they start without
# LD_LIBRARY_PATH. liboar needs no path to itself: programs carry that.
set_target_properties(oar oar_cli PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS oar EXPORT oarTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS oar_static EXPORT oarStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS oar_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET oar_mpi)
  set_target_properties(oar_mpi PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS oar_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/oar DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

# What a static link needs, as this build found it. liboar.a does not
# reference MPI (the transport is liboar_mpi.so, opened at run time), so
# neither list has it. In the build tree oar_static links the imported
# targets; installed, it names the libraries themselves, so that
# find_package(oar) needs no pkg-config or Find modules of its own.
set(OAR_STATIC_LIBS ${LAPACKE_LINK_LIBRARIES} ${OPENBLAS_LINK_LIBRARIES} ${CJSON_LINK_LIBRARIES} ${ZLIB_LIBRARIES})
set(OAR_PC_REQUIRES_PRIVATE lapacke openblas libcjson)
set(OAR_PC_LIBS_PRIVATE "-Wl,--undefined=oari_start") # keep the start-up constructor (src/init/init.c)
pkg_check_modules(OAR_ZLIB_PC QUIET zlib) # FindZLIB found it; zlib.pc may exist too
if(OAR_ZLIB_PC_FOUND)
  list(APPEND OAR_PC_REQUIRES_PRIVATE zlib)
else()
  string(APPEND OAR_PC_LIBS_PRIVATE " -lz")
endif()
if(OAR_WITH_ONNX)
  list(APPEND OAR_STATIC_LIBS ${PROTOBUFC_LINK_LIBRARIES})
  list(APPEND OAR_PC_REQUIRES_PRIVATE libprotobuf-c)
endif()
if(OAR_WITH_DNNL) # (oneDNN installs no .pc file)
  list(APPEND OAR_STATIC_LIBS ${DNNL_LIBRARY})
  string(APPEND OAR_PC_LIBS_PRIVATE " -ldnnl")
endif()
if(OAR_FFTW)
  list(APPEND OAR_STATIC_LIBS ${FFTW_OMP_LIBS} ${FFTWF_OMP_LIBS} ${FFTW_LINK_LIBRARIES})
  list(APPEND OAR_PC_REQUIRES_PRIVATE fftw3 fftw3f)
  string(APPEND OAR_PC_LIBS_PRIVATE " -lfftw3_omp -lfftw3f_omp")
endif()
list(APPEND OAR_STATIC_LIBS ${OpenMP_C_LIBRARIES} m ${CMAKE_DL_LIBS} pthread)
foreach(lib ${OpenMP_C_LIB_NAMES} m ${CMAKE_DL_LIBS} pthread) # (gomp, pthread: OpenMP's)
  string(APPEND OAR_PC_LIBS_PRIVATE " -l${lib}")
endforeach()
list(REMOVE_DUPLICATES OAR_STATIC_LIBS)
string(REPLACE ";" " " OAR_PC_REQUIRES_PRIVATE "${OAR_PC_REQUIRES_PRIVATE}")
get_target_property(OAR_STATIC_BUILD_LIBS oar_static INTERFACE_LINK_LIBRARIES)
set(OAR_STATIC_IFACE)
foreach(lib ${OAR_STATIC_BUILD_LIBS})
  list(APPEND OAR_STATIC_IFACE "$<BUILD_INTERFACE:${lib}>")
endforeach()
foreach(lib ${OAR_STATIC_LIBS})
  list(APPEND OAR_STATIC_IFACE "$<INSTALL_INTERFACE:${lib}>")
endforeach()
set_property(TARGET oar_static PROPERTY INTERFACE_LINK_LIBRARIES ${OAR_STATIC_IFACE})

# oar.pc is written at install time, for the prefix installed to (cmake
# --install --prefix may differ from CMAKE_INSTALL_PREFIX). Its Libs carry
# -Wl,-rpath,${libdir} unless libdir is one the toolchain links from by
# default (/usr/lib/<triplet>, ...): a program linked against a liboar.so
# in any other prefix would otherwise not start without LD_LIBRARY_PATH.
# (file(INSTALL) adds DESTDIR and records the file in install_manifest.txt.)
install(CODE "
  set(OAR_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(OAR_PC_VERSION \"${PROJECT_VERSION}\")
  set(OAR_PC_LIBS_PRIVATE \"${OAR_PC_LIBS_PRIVATE}\")
  set(OAR_PC_REQUIRES_PRIVATE \"${OAR_PC_REQUIRES_PRIVATE}\")
  set(OAR_PC_LIBDIR \"\\\${prefix}/${CMAKE_INSTALL_LIBDIR}\")
  set(OAR_PC_INCLUDEDIR \"\\\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}\")
  get_filename_component(libdir \"${CMAKE_INSTALL_LIBDIR}\" ABSOLUTE BASE_DIR \"\${CMAKE_INSTALL_PREFIX}\")
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_LIBDIR}\")
    set(OAR_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  endif()
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_INCLUDEDIR}\")
    set(OAR_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  endif()
  set(system_dirs [[${CMAKE_C_IMPLICIT_LINK_DIRECTORIES}]])
  list(FIND system_dirs \"\${libdir}\" system)
  set(OAR_PC_RPATH \"\")
  if(system LESS 0)
    set(OAR_PC_RPATH \"-Wl,-rpath,\\\${libdir} \")
  endif()
  configure_file(\"${CMAKE_SOURCE_DIR}/cmake/oar.pc.in\" \"${CMAKE_BINARY_DIR}/pkgconfig/oar.pc\" @ONLY)
  file(INSTALL DESTINATION \"\${libdir}/pkgconfig\" TYPE FILE FILES \"${CMAKE_BINARY_DIR}/pkgconfig/oar.pc\")
")

# The CMake package. The version file accepts 0.1.x for find_package(oar 0.1).
set(OAR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/oar)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/oarConfig.cmake.in ${CMAKE_BINARY_DIR}/oarConfig.cmake
                              INSTALL_DESTINATION ${OAR_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/oarConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/oarConfig.cmake ${CMAKE_BINARY_DIR}/oarConfigVersion.cmake
        DESTINATION ${OAR_CMAKE_DIR})
install(EXPORT oarTargets NAMESPACE oar:: DESTINATION ${OAR_CMAKE_DIR})
install(EXPORT oarStaticTargets NAMESPACE oar:: DESTINATION ${OAR_CMAKE_DIR})

if(OAR_BUILD_TESTS)
  # Install to a temporary prefix, build an outside project four ways
  # (pkg-config and find_package, shared and static) and run each, and the
  # installed oar, with an empty environment (tests/install/).
  # Not in sanitizer builds: an outside program linked with an instrumented
  # liboar would need the sanitizer runtimes, which no user build has.
  if(NOT OAR_SANITIZE)
    add_test(NAME install COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/install_test.sh ${CMAKE_BINARY_DIR}
             ${CMAKE_COMMAND} ${CMAKE_C_COMPILER})
    set_tests_properties(install PROPERTIES TIMEOUT 900)
    # The core build: MPI, ONNX and the plugins off; what is left builds,
    # runs, links none of them, and the left-out parts fail saying so.
    add_test(NAME core_build COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/core_build.sh ${CMAKE_SOURCE_DIR}
             ${CMAKE_COMMAND} ${CMAKE_C_COMPILER})
    set_tests_properties(core_build PROPERTIES TIMEOUT 1200)
  endif()
  # Every OAR_API name of the public headers is in liboar.so's dynamic symbols.
  add_test(NAME exports COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/exports.sh ${CMAKE_SOURCE_DIR}/include
           $<TARGET_FILE:oar>)
  if(OAR_WITH_MPI)
    # A program without dtensors does not load libmpi (the transport is a
    # module liboar opens on oar_dist_init, src/dist/mpi_load.c).
    # (the program must run to its end, so a crash cannot pass for "no libmpi")
    add_test(NAME first_program_loads_no_mpi COMMAND sh -c
             "LD_DEBUG=libs \"$0\" >/dev/null 2>\"$1\" || { echo \"first_program failed\"; exit 1; }; if grep 'calling init' \"$1\" | grep libmpi; then exit 1; fi"
             $<TARGET_FILE:first_program> ${CMAKE_BINARY_DIR}/first_program_ld_debug.log)
  endif()
endif()
