# cmake -DBUILD_DIR=... -DPREFIX=... -DCONSUMER_BUILD=... -P install_fresh.cmake
# Installs the build tree into an empty prefix (and forgets the previous consumer build), so
# the consumer test sees exactly what `cmake --install` produces now.
file(REMOVE_RECURSE "${PREFIX}" "${CONSUMER_BUILD}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed (${rc})")
endif()
foreach(f include/quantkv/quantkv.h include/quantkv/version.hpp include/quantkv/tensor.hpp)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "installed package lacks ${f}")
  endif()
endforeach()
file(GLOB_RECURSE configs "${PREFIX}/*/quantkvConfig.cmake" "${PREFIX}/*/quantkvConfigVersion.cmake")
list(LENGTH configs n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "expected quantkvConfig.cmake and quantkvConfigVersion.cmake, found: ${configs}")
endif()
