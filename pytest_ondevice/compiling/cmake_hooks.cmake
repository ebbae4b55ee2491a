# Made part of a CMake project by pytest-ondevice (CMAKE_PROJECT_INCLUDE, right after its
# project()): at the end of the top-level directory, when every target exists, each
# executable gets the board's runtime (its start-up, output and crash line on bare metal;
# the crash line and Unity's running case on Linux), and each that uses a test framework
# pytest-ondevice reads gets that framework's hook (its verdicts stamped with a per-run
# nonce, so that a test printing the framework's own pass lines proves nothing).
#   ONDEVICE_HOOKS: LIBS=HEADERS=SOURCE entries: LIBS matched against the target's
#     LINK_LIBRARIES, HEADERS against the #include lines of its sources
#   ONDEVICE_RUNTIME, ONDEVICE_RUNTIME_OPTIONS: the board's runtime sources and defines
#   ONDEVICE_LINK_DEPENDS: the board's linker script (an edit relinks)
if(ONDEVICE_RUNTIME)
  get_property(_ondevice_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "C" IN_LIST _ondevice_languages)  # the runtime is C; a C++-only project gets C too
    enable_language(C)
  endif()
endif()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _ondevice_link_hooks)

function(_ondevice_targets dir out)
  get_property(found DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _ondevice_targets("${sub}" more)
    list(APPEND found ${more})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

# the #include lines of a target's own sources, one string
function(_ondevice_includes target out)
  get_target_property(sources ${target} SOURCES)
  get_target_property(dir ${target} SOURCE_DIR)
  set(found "")
  foreach(source IN LISTS sources)
    if(source MATCHES "^\\$<")  # a generator expression: not a file yet
      continue()
    endif()
    if(NOT IS_ABSOLUTE "${source}")
      set(source "${dir}/${source}")
    endif()
    if(EXISTS "${source}" AND NOT IS_DIRECTORY "${source}")
      file(STRINGS "${source}" lines REGEX "^[ \t]*#[ \t]*include")
      string(APPEND found "${lines};")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Our sources are compiled once each, as OBJECT libraries, whatever executables use them, in
# the C standard and with the warnings they were written for: a project built with
# -std=c89 -pedantic -Werror (cJSON's) builds its own code so, never ours.
function(_ondevice_runtime_objects)
  add_library(_ondevice_runtime OBJECT ${ONDEVICE_RUNTIME})
  set_target_properties(_ondevice_runtime PROPERTIES C_STANDARD 11 C_EXTENSIONS ON)
  target_compile_options(_ondevice_runtime PRIVATE ${ONDEVICE_RUNTIME_OPTIONS} $<$<COMPILE_LANGUAGE:C>:-std=gnu11> -w)
endfunction()

# A framework's hook, compiled once with what the first executable that uses the framework
# is compiled with (the framework's include directories and definitions, through its libraries).
function(_ondevice_hook_objects name source exe libs)
  add_library(${name} OBJECT "${source}")
  target_compile_options(${name} PRIVATE -w)
  if(libs)
    target_link_libraries(${name} PRIVATE ${libs})
  endif()
  target_include_directories(${name} PRIVATE $<TARGET_PROPERTY:${exe},INCLUDE_DIRECTORIES>)
  target_compile_definitions(${name} PRIVATE $<TARGET_PROPERTY:${exe},COMPILE_DEFINITIONS>)
endfunction()

function(_ondevice_link_hooks)
  _ondevice_targets("${CMAKE_SOURCE_DIR}" targets)
  if(ONDEVICE_RUNTIME)
    _ondevice_runtime_objects()
  endif()
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(imported ${target} IMPORTED)
    if(NOT type STREQUAL "EXECUTABLE" OR imported)
      continue()
    endif()
    if(ONDEVICE_RUNTIME)
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:_ondevice_runtime>)
    endif()
    if(ONDEVICE_LINK_DEPENDS)
      set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${ONDEVICE_LINK_DEPENDS}")
    endif()
    get_target_property(libs ${target} LINK_LIBRARIES)
    if(NOT libs)
      set(libs "")
    endif()
    _ondevice_includes(${target} includes)
    set(index 0)
    foreach(entry IN LISTS ONDEVICE_HOOKS)
      math(EXPR index "${index} + 1")
      string(REPLACE "=" ";" parts "${entry}")
      list(GET parts 0 lib_pattern)
      list(GET parts 1 header_pattern)
      list(GET parts 2 source)
      if(libs MATCHES "${lib_pattern}" OR includes MATCHES "#[ \t]*include[ \t]*[<\"][^>\"]*(${header_pattern})")
        if(NOT TARGET _ondevice_hook_${index})
          _ondevice_hook_objects(_ondevice_hook_${index} "${source}" ${target} "${libs}")
        endif()
        target_sources(${target} PRIVATE $<TARGET_OBJECTS:_ondevice_hook_${index}>)
        break()
      endif()
    endforeach()
  endforeach()
endfunction()
