"""The tfdiag TensorBoard tab: a dynamic (iframed) plugin over ``tfdiag.analysis``.

TensorBoard finds it through the ``tensorboard_plugins`` entry point
(``tfdiag.tb_plugin.plugin:TfdiagPluginLoader``). Routes are documented in
``http_api.md`` beside this file. Nothing here imports TensorFlow.
"""
