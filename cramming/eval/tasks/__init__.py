"""Downstream tasks, one file each (base.py says what a Task is); registry.py names them for `eval.tasks`.

Adding one: its file (a Task subclass, or a TextClassification one for a text or text pair to a label or a
score: it loads its splits, encodes, puts its head on the encoder, scores, saves what it trained), one line in
registry.py, a test and a paragraph in docs/glue.md; a task with settings of its own declares them in its file
(`settings`), and the registry adds them to the `eval` schema. eval/run.py does not change.
"""
