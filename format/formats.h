/* The formats built in: the one place a format is registered (adding one:
 * docs/architecture.md). Each line names the format's folder under format/
 * and a descriptor it defines, in the order sf_format_for tries them.
 * sf_format.c makes its list from these lines, and meson.build builds the
 * folders they name (-Dformats picks some). No other line belongs here. */
SF_FORMAT(tsumugi, sf_fmt_tsumugi)
SF_FORMAT(tatami, sf_fmt_tatami)
SF_FORMAT(taridx, sf_fmt_taridx)
SF_FORMAT(shardlake, sf_fmt_sidx)
SF_FORMAT(shardlake, sf_fmt_alias)
SF_FORMAT(tet, sf_fmt_tet)
