"""The GPU check's pieces (``python -m bench.gpu_check``, one stage per process: ``python -m bench.gpu_stages``):
the stage table and the plan that fits the deadline (:mod:`.table`, :mod:`.schedule`), the stage processes that die
with their parent (:mod:`.process`), the record a stage writes as it goes (:mod:`.record`), the shapes, model and
planner rows (:mod:`.shapes`, :mod:`.model`, :mod:`.rows`), the measurements (:mod:`.measure`), the teacher-forced
token agreement (:mod:`.agreement`), the stages (:mod:`.decode`, :mod:`.compaction`, :mod:`.stages`) and the
report (:mod:`.render`)."""
