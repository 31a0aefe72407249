"""The training paths over hyper-parameters, and the memory plan."""
