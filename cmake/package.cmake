# package.cmake: installs what other programs find libcohort by: cohort.pc (pkg-config) and the
# CMake package cohortConfig.cmake, both relocatable (they name no absolute install prefix, so
# that `cmake --install --prefix P` anywhere gives a working P/lib/pkgconfig/cohort.pc).
include(CMakePackageConfigHelpers)

# ---- pkg-config: Libs.private lists what a static link needs besides libcohort.a ----
# cohort_pc_link_flags(OUT ITEMS...): linker flags for COHORT_LINK_LIBS' items (imported targets,
# library files, bare names), -L only for folders the compiler does not search already.
function(cohort_pc_link_flags out)
  set(flags "")
  foreach(item ${ARGN})
    if(item STREQUAL "Threads::Threads")
      list(APPEND flags "-pthread")
    elseif(item STREQUAL "OpenMP::OpenMP_C")
      list(APPEND flags ${OpenMP_C_FLAGS}) # the compiler driver links its own OpenMP runtime
    elseif(item STREQUAL "OpenSSL::Crypto")
      cohort_pc_link_flags(crypto "${OPENSSL_CRYPTO_LIBRARY}")
      list(APPEND flags ${crypto})
    elseif(IS_ABSOLUTE "${item}")
      get_filename_component(dir "${item}" DIRECTORY)
      get_filename_component(name "${item}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND flags "-L${dir}")
      endif()
      list(APPEND flags "-l${name}")
    elseif(item MATCHES "^-")
      list(APPEND flags "${item}")
    elseif(item)
      list(APPEND flags "-l${item}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
cohort_pc_link_flags(COHORT_PC_LIBS_PRIVATE ${COHORT_LINK_LIBS})
list(JOIN COHORT_PC_LIBS_PRIVATE " " COHORT_PC_LIBS_PRIVATE)
# the prefix as seen from the .pc file's own folder (pkg-config's ${pcfiledir})
file(RELATIVE_PATH COHORT_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" COHORT_PC_TO_PREFIX "${COHORT_PC_TO_PREFIX}")
configure_file("${PROJECT_SOURCE_DIR}/cmake/cohort.pc.in" "${PROJECT_BINARY_DIR}/cohort.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/cohort.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

# ---- CMake: find_package(cohort) gives cohort::cohort (shared) and cohort::cohort_static ----
set(COHORT_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/cohort")
install(EXPORT cohortTargets NAMESPACE cohort:: DESTINATION "${COHORT_CMAKE_DIR}")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/cohortConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/cohortConfig.cmake"
                              INSTALL_DESTINATION "${COHORT_CMAKE_DIR}")
# 0.x: a minor release may change the API, so only the same major.minor satisfies a request;
# from 1.0 on, the same major (the rule the soname follows, CMakeLists.txt)
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(COHORT_PACKAGE_COMPATIBILITY SameMinorVersion)
else()
  set(COHORT_PACKAGE_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file("${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake"
                                 COMPATIBILITY ${COHORT_PACKAGE_COMPATIBILITY})
install(FILES "${PROJECT_BINARY_DIR}/cohortConfig.cmake"
              "${PROJECT_BINARY_DIR}/cohortConfigVersion.cmake"
        DESTINATION "${COHORT_CMAKE_DIR}")
