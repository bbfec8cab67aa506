"""ps_load_table: variables and bytes held by each ps."""

import pandas as pd

from tfdiag.analysis.placement import ps_load_table


def _placement(*rows):
    return pd.DataFrame(rows, columns=["variable", "task", "bytes", "shape"])


def test_a_variable_recorded_by_two_collectors_counts_once_and_namesakes_of_other_shapes_each():
    # ps_fit's hot block: two layers built outside a call, both kernels named "kernel:0".
    placement = _placement(("kernel:0", "ps:0", 4 << 20, "[256,4096]"), ("kernel:0", "ps:0", 4 << 20, "[4096,256]"),
                           ("kernel:0", "ps:0", 4 << 20, "[4096,256]"), ("trunk/kernel:0", "ps:1", 1 << 18, "[256,256]"))
    table = ps_load_table(placement, pd.DataFrame()).set_index("task")
    assert table.loc["ps:0", "variables"] == 2 and table.loc["ps:0", "bytes"] == 8 << 20
    assert table.loc["ps:1", "bytes"] == 1 << 18
