/* The two Shardlake format descriptors: .sidx shards and alias files. */
#ifndef SL_FORMATS_H
#define SL_FORMATS_H

#include "sf_format.h"

extern const struct sf_format sf_fmt_sidx;
extern const struct sf_format sf_fmt_alias;

#endif
