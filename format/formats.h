/* The formats built in: the one place a format is registered (adding one:
 * docs/architecture.md). Each line names the format's folder under format/
 * and a descriptor it defines, in the order sf_format_for tries them.
 * sf_format.c makes its list from these lines, and meson.build builds the
 * folders they name (-Dformats picks some). No other line belongs here. */
SF_FORMAT(tsumugi, tsm_format)
SF_FORMAT(tatami, tat_format)
SF_FORMAT(taridx, tx_format)
SF_FORMAT(taridx, tx_tar_format)
SF_FORMAT(taridx, tx_targz_format)
SF_FORMAT(taridx, tx_tgz_format)
SF_FORMAT(taridx, tx_tarzst_format)
SF_FORMAT(taridx, tx_tzst_format)
SF_FORMAT(taridx, tx_tarxz_format)
SF_FORMAT(taridx, tx_txz_format)
SF_FORMAT(taridx, tx_tarbz2_format)
SF_FORMAT(taridx, tx_tbz2_format)
SF_FORMAT(taridx, tx_tbz_format)
SF_FORMAT(taridx, tx_tarlz4_format)
SF_FORMAT(shardlake, sl_sidx_format)
SF_FORMAT(shardlake, sl_alias_format)
SF_FORMAT(tet, tet_format)
