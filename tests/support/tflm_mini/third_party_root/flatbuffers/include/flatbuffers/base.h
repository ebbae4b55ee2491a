// Stands for a third-party header root (flatbuffers) reached through ${FLATBUFFERS_DIR}.
#ifndef FLATBUFFERS_BASE_H_
#define FLATBUFFERS_BASE_H_
#define FLATBUFFERS_VERSION_MAJOR 25
#endif
