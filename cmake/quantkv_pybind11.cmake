# Finds pybind11 >= 2.12 for the interpreter Python_EXECUTABLE: the pybind11 pip package
# installed in it (`python -m pybind11 --cmakedir`), or one given with -Dpybind11_DIR.
set(PYBIND11_FINDPYTHON ON)
if(NOT pybind11_DIR)
  execute_process(COMMAND ${Python_EXECUTABLE} -m pybind11 --cmakedir
                  OUTPUT_VARIABLE quantkv_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE quantkv_pybind11_rc ERROR_QUIET)
  if(quantkv_pybind11_rc EQUAL 0)
    set(pybind11_DIR ${quantkv_pybind11_dir} CACHE PATH "pybind11's CMake package (from pip)")
  endif()
endif()
find_package(pybind11 2.12 CONFIG QUIET)
