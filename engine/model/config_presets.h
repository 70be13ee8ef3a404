/* Named configurations (k3-model.md §6): config.json text by name.
 * Owns: the presets' texts and their names.  Does not own: parsing them (config.h). */
#ifndef K3_CONFIG_PRESETS_H
#define K3_CONFIG_PRESETS_H

/* The config.json text of a named preset, or NULL. */
const char *k3_config_preset(const char *name);
/* "k3, k3-tiny, k3-bench, k3-slice, k3-dsv2", for messages. */
const char *k3_config_preset_names(void);

#endif
