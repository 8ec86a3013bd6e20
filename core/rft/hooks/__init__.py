"""The hook specifications by stage of a run (:mod:`rft.hooks.algorithm`,
:mod:`rft.hooks.exploration`, :mod:`rft.hooks.run`) and their markers; :mod:`rft.hookspecs`
gathers them into the one plugin contract."""
