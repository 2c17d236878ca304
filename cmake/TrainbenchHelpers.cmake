# Shared warning flags for the project's own targets.
function(tb_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
endfunction()

# A core module: one static library per folder under core/.
function(tb_core_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC "${PROJECT_SOURCE_DIR}/core")
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  tb_warnings(${name})
endfunction()

# Translation units that include LibTorch share one precompiled header.
# The header is built for a PIC static library, and a TU that reuses it must
# use the same code model: GCC 14 ignores it in an executable's -fPIE TU
# (-Winvalid-pch) and compiles torch.h again. Qt 6.4 adds -fPIC to its users
# anyway; Qt 6.8 (Debian 13) does not.
function(tb_use_torch_pch target)
  if(TARGET tb_torch_pch)
    target_precompile_headers(${target} REUSE_FROM tb_torch_pch)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
  endif()
endfunction()

# One Qt Test executable per test class, registered with ctest.
# Labels: "learning" for the long learning suites (LEARNING), which run on one
# LibTorch tree only; "gui" for the panel suites (GUI); "cli" for LibTorch-free
# command-line suites that also run on one tree only (CLI); every other suite
# is "torch2", the set scripts/test also runs against LibTorch 2.x. ENTRIES: the
# executable is registered by tb_add_test_entry instead, one ctest entry per
# group of test functions.
function(tb_add_test name)
  cmake_parse_arguments(ARG "TORCH;LEARNING;GUI;CLI;ENTRIES" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  set_target_properties(${name} PROPERTIES AUTOMOC ON)
  tb_moc_without_torch(${name})
  # The source tree's and trainbench-cli's paths come from tb_test_paths
  # (tests/TestPaths.h), never from a compile definition: ccache hits in any clone.
  target_link_libraries(${name} PRIVATE Qt6::Test tb_test_paths ${ARG_LIBS})
  target_compile_definitions(${name} PRIVATE QT_NO_KEYWORDS QT_NO_CONTEXTLESS_CONNECT)
  tb_warnings(${name})
  # Precompiled headers: a suite marked TORCH (it includes or links LibTorch)
  # reuses the core's LibTorch header; any other but the panel suites reuses
  # Qt Test's (tests/CMakeLists.txt), built for a PIC static library, so a
  # reusing TU must be PIC too (tb_use_torch_pch says why). A header of
  # LibTorch with Qt Test took 55 s to build and saved about 4 s in each of
  # 11 suites; the panel suites have Qt Widgets' definitions, which Qt Test's
  # header lacks, and a header of their own would cost what it saves.
  if(ARG_TORCH)
    tb_use_torch_pch(${name})
  elseif(NOT ARG_GUI AND TARGET tb_test_pch)
    target_precompile_headers(${name} REUSE_FROM tb_test_pch)
    target_compile_options(${name} PRIVATE -fPIC)
  endif()
  # The suite includes its moc output itself; AUTOMOC's mocs_compilation.cpp
  # is empty and needs no header loaded.
  set_source_files_properties("${CMAKE_CURRENT_BINARY_DIR}/${name}_autogen/mocs_compilation.cpp"
    TARGET_DIRECTORY ${name} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(ARG_LEARNING)
    set(label learning)
  elseif(ARG_GUI)
    set(label gui)
  elseif(ARG_CLI)
    set(label cli)
  else()
    set(label torch2)
  endif()
  # Kept for tb_add_test_entry.
  set_target_properties(${name} PROPERTIES TB_TEST_LABEL ${label} TB_TEST_TIMEOUT ${ARG_TIMEOUT})
  if(NOT ARG_ENTRIES)
    add_test(NAME ${name} COMMAND ${name})
    tb_test_properties(${name} ${label} ${ARG_TIMEOUT})
  endif()
endfunction()

function(tb_test_properties test label timeout)
  # Qt Test's own watchdog (5 minutes by default) must not fire before ctest's
  # limit on a busy machine.
  math(EXPR watchdog_ms "${timeout} * 1000")
  set_tests_properties(${test} PROPERTIES TIMEOUT ${timeout} LABELS ${label}
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;QTEST_FUNCTION_TIMEOUT=${watchdog_ms}")
endfunction()

# tb_add_test_entry(EXECUTABLE TEST COST FUNCTION...): a ctest entry running
# some of a suite's test functions, with the suite's label and limit. COST is
# the expected seconds: ctest starts the costliest first.
function(tb_add_test_entry executable test cost)
  add_test(NAME ${test} COMMAND ${executable} ${ARGN})
  get_target_property(label ${executable} TB_TEST_LABEL)
  get_target_property(timeout ${executable} TB_TEST_TIMEOUT)
  tb_test_properties(${test} ${label} ${timeout})
  set_tests_properties(${test} PROPERTIES COST ${cost})
endfunction()

# Compiles a resource file into the target as `std::string tb::FUNCTION()`.
function(tb_embed_text target input function)
  set(output "${CMAKE_CURRENT_BINARY_DIR}/${function}.cpp")
  add_custom_command(OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}" -DINPUT=${input} -DOUTPUT=${output} -DFUNCTION=${function}
            -P "${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake"
    DEPENDS "${input}" "${PROJECT_SOURCE_DIR}/cmake/EmbedText.cmake"
    COMMENT "Embedding ${input}")
  target_sources(${target} PRIVATE "${output}")
  set_source_files_properties("${output}" PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# A test's moc runs without LibTorch's include folders. moc follows every
# #include it can find, and a test that includes LibTorch made it read all of
# LibTorch's headers: 15 to 70 s a test against the CUDA LibTorch 2.6, rerun
# for every test in every new clone (moc's output is not cached). A test class
# needs none of them (moc skips an include it cannot find), and its output is
# the same. The wrapper drops the -I of each folder in TORCH_INCLUDE_DIRS.
function(tb_moc_without_torch target)
  if(NOT TORCH_INCLUDE_DIRS OR NOT TARGET Qt6::moc)
    return()
  endif()
  set(wrapper "${CMAKE_BINARY_DIR}/moc-without-torch")
  get_property(done GLOBAL PROPERTY TB_MOC_WRAPPER_DONE)
  if(NOT done)
    set(patterns "")
    foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
      string(APPEND patterns "    \"-I${dir}\") continue ;;\n")
    endforeach()
    file(GENERATE OUTPUT "${wrapper}" CONTENT
"#!/bin/sh
# Generated by cmake/TrainbenchHelpers.cmake (tb_moc_without_torch): Qt's moc
# without LibTorch's include folders.
for a do
  shift
  case \$a in
${patterns}  esac
  set -- \"\$@\" \"\$a\"
done
exec \"$<TARGET_FILE:Qt6::moc>\" \"\$@\"
" FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    set_property(GLOBAL PROPERTY TB_MOC_WRAPPER_DONE TRUE)
  endif()
  set_target_properties(${target} PROPERTIES AUTOMOC_EXECUTABLE "${wrapper}")
endfunction()
