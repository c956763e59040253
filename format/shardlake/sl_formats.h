/* The two Shardlake format descriptors: .sidx shards and alias files. */
#ifndef SL_FORMATS_H
#define SL_FORMATS_H

#include "sf_format.h"

extern const struct sf_format sl_sidx_format;
extern const struct sf_format sl_alias_format;

#endif
