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

function(_ondevice_link_hooks)
  _ondevice_targets("${CMAKE_SOURCE_DIR}" targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(imported ${target} IMPORTED)
    if(NOT type STREQUAL "EXECUTABLE" OR imported)
      continue()
    endif()
    if(ONDEVICE_RUNTIME)
      target_sources(${target} PRIVATE ${ONDEVICE_RUNTIME})
      if(ONDEVICE_RUNTIME_OPTIONS)
        set_source_files_properties(${ONDEVICE_RUNTIME} TARGET_DIRECTORY ${target}
          PROPERTIES COMPILE_OPTIONS "${ONDEVICE_RUNTIME_OPTIONS}")
      endif()
    endif()
    if(ONDEVICE_LINK_DEPENDS)
      set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${ONDEVICE_LINK_DEPENDS}")
    endif()
    get_target_property(libs ${target} LINK_LIBRARIES)
    _ondevice_includes(${target} includes)
    foreach(entry IN LISTS ONDEVICE_HOOKS)
      string(REPLACE "=" ";" parts "${entry}")
      list(GET parts 0 lib_pattern)
      list(GET parts 1 header_pattern)
      list(GET parts 2 source)
      if(libs MATCHES "${lib_pattern}" OR includes MATCHES "#[ \t]*include[ \t]*[<\"][^>\"]*(${header_pattern})")
        target_sources(${target} PRIVATE "${source}")
        break()
      endif()
    endforeach()
  endforeach()
endfunction()
