// Pipeline parallelism, one header per concept; this one includes them all:
//   schedule.h           schedules as data: each rank's list of actions,
//                        the GPipe, 1F1B and interleaved 1F1B generators
//   schedule_check.h     the checker that proves a schedule before it runs
//                        (deadlocks, matching, bubble, peak activations)
//   partition.h          cutting layers into stages
//   pipeline_executor.h  running a checked schedule on this rank's stages
//   pipeline_trainer.h   the executor in nn::Trainer's step loop
//   pipeline_trace.h     a step as a Chrome trace
#pragma once

#include "braid/partition.h"
#include "braid/pipeline_executor.h"
#include "braid/pipeline_trace.h"
#include "braid/pipeline_trainer.h"
#include "braid/schedule.h"
#include "braid/schedule_check.h"
