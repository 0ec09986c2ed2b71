#pragma once
/// @file
/// Now trainbench/sdk/support/autocast.h: a helper compiled into the plugin that
/// includes it, not part of the plugin contract. This header stays so that
/// plugins written against earlier SDK headers still build; include the
/// support header in new code.
#include "trainbench/sdk/support/autocast.h"
