# The library's layers as targets. Each layer's only include directory in the build tree is a folder of
# symbolic links to its own headers, so a source sees the headers of its layer and of the layers it links,
# and an include of a layer above it fails to build ("No such file or directory").
#
# The calls below (in src/CMakeLists.txt and src/capi/CMakeLists.txt) are the layer table: each names a
# layer, its public headers and the layers it depends on. tessera_write_layer_table() writes it out for the
# test that checks every #include of src/ and include/tessera/ against it (tests/layering).

set(TESSERA_LAYER_STAGING ${PROJECT_BINARY_DIR}/layers)

# Fills ${TESSERA_LAYER_STAGING}/<layer>/ with links to the layer's headers: tessera/<h> to
# include/tessera/<h> for each public header, <layer>/<h> to src/<layer>/<h> for its internal ones, and
# makes that folder an include directory of `target` in `scope` (PUBLIC, INTERFACE). Records the layer and
# what it depends on in the table.
function(tessera_stage_layer target layer scope)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "" "HEADERS;DEPENDS")
  set(stage ${TESSERA_LAYER_STAGING}/${layer})
  # From scratch at each configure: a header removed or moved leaves no stale link behind.
  file(REMOVE_RECURSE ${stage})
  file(MAKE_DIRECTORY ${stage}/tessera)
  foreach(header IN LISTS arg_HEADERS)
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/include/tessera/${header})
      message(FATAL_ERROR "layer ${layer}: include/tessera/${header} does not exist")
    endif()
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/tessera/${header} ${stage}/tessera/${header} SYMBOLIC)
  endforeach()
  set(folder "")
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/${layer})
    set(folder ${layer})
    file(GLOB internal CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${layer}/*.hpp)
    file(MAKE_DIRECTORY ${stage}/${layer})
    foreach(header IN LISTS internal)
      get_filename_component(name ${header} NAME)
      file(CREATE_LINK ${header} ${stage}/${layer}/${name} SYMBOLIC)
    endforeach()
  endif()
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${stage}>
                                                $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  set_property(GLOBAL APPEND PROPERTY TESSERA_LAYERS ${layer})
  set_property(GLOBAL PROPERTY TESSERA_LAYER_${layer}_TARGET ${target})
  set_property(GLOBAL PROPERTY TESSERA_LAYER_${layer}_FOLDER "${folder}")
  set_property(GLOBAL PROPERTY TESSERA_LAYER_${layer}_HEADERS "${arg_HEADERS}")
  set_property(GLOBAL PROPERTY TESSERA_LAYER_${layer}_DEPENDS "${arg_DEPENDS}")
endfunction()

# tessera_add_layer(<layer> [INTERFACE] HEADERS <include/tessera headers> DEPENDS <layers> SOURCES <files>)
# A static library tessera_<layer> (an interface library when header only), exported as tessera::<layer>,
# linking the layers it depends on publicly. Compiled with the project's warnings, position independent
# (libtessera_c.so carries the layers inside).
function(tessera_add_layer layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "INTERFACE" "" "HEADERS;DEPENDS;SOURCES")
  set(target tessera_${layer})
  if(arg_INTERFACE)
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
  else()
    add_library(${target} STATIC ${arg_SOURCES})
    set(scope PUBLIC)
    target_compile_options(${target} PRIVATE ${TESSERA_WARNINGS})
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${layer})
  add_library(tessera::${layer} ALIAS ${target})
  tessera_stage_layer(${target} ${layer} ${scope} HEADERS ${arg_HEADERS} DEPENDS ${arg_DEPENDS})
  foreach(dependency IN LISTS arg_DEPENDS)
    target_link_libraries(${target} ${scope} tessera_${dependency})
  endforeach()
  install(TARGETS ${target} EXPORT tesseraTargets)
endfunction()

# Writes the layer table as JSON to `path`: {"layers": [{"name", "target", "folder", "headers", "depends"}, ...]}.
function(tessera_write_layer_table path)
  get_property(layers GLOBAL PROPERTY TESSERA_LAYERS)
  set(json "{\"layers\": []}")
  set(index 0)
  foreach(layer IN LISTS layers)
    get_property(target GLOBAL PROPERTY TESSERA_LAYER_${layer}_TARGET)
    get_property(folder GLOBAL PROPERTY TESSERA_LAYER_${layer}_FOLDER)
    get_property(headers GLOBAL PROPERTY TESSERA_LAYER_${layer}_HEADERS)
    get_property(depends GLOBAL PROPERTY TESSERA_LAYER_${layer}_DEPENDS)
    set(entry "{\"name\": \"${layer}\", \"target\": \"${target}\", \"folder\": \"${folder}\",")
    string(APPEND entry " \"headers\": [], \"depends\": []}")
    foreach(list_name IN ITEMS headers depends)
      set(position 0)
      foreach(item IN LISTS ${list_name})
        string(JSON entry SET "${entry}" ${list_name} ${position} "\"${item}\"")
        math(EXPR position "${position} + 1")
      endforeach()
    endforeach()
    string(JSON json SET "${json}" layers ${index} "${entry}")
    math(EXPR index "${index} + 1")
  endforeach()
  file(CONFIGURE OUTPUT ${path} CONTENT "${json}\n" @ONLY)
endfunction()
