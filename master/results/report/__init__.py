"""The run's report: one self-contained offline HTML page per run folder (``report.html``).

``runfolder`` reads the folder, ``series`` downsamples, ``content`` chooses the charts,
``page`` writes the HTML, ``build`` puts them together. The chart library (uPlot) is vendored
in ``vendor/`` with its license and inlined into every page; the page fetches nothing.
"""
