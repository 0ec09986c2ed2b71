#pragma once
// trainbench/engine_export.h: marks what libtrainbench.so exports (the
// engine's API, trainbench/engine.h and the headers it includes).

#define TRAINBENCH_ENGINE_API __attribute__((visibility("default")))
