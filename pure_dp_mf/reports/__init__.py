"""Tables and figures (``figures``), the papers' printed numbers (``published``) and the
``reproduce`` report."""
