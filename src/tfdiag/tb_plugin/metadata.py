"""Names shared by the tfdiag plugin's backend and frontend."""

# The plugin's name: its routes live under /data/plugin/tfdiag/ and its runs hold
# plugins/tfdiag/ (tfdiag.store.PLUGIN_DIR).
PLUGIN_NAME = "tfdiag"

# The tab's label in TensorBoard's top bar.
TAB_NAME = "tfdiag"
