"""quantmark's log lines: one per record, named by part, even when a framework configures the
root logger (ONNX Runtime's quantizer calls logging.basicConfig)."""

from __future__ import annotations

from tests.conftest import run_python


def test_one_line_per_record_named_by_part_even_after_basic_config():
    proc = run_python("""
        import logging
        from quantmark.ground import logs
        logs.setup()
        logs.setup()  # twice: still one handler
        logging.basicConfig(level=logging.INFO)  # what a framework may do
        logging.getLogger("quantmark.models.artifacts").info("quantized in %.1f s", 5.0)
        logging.getLogger("quantmark.qsl.cache").warning("cache rebuilt")
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["[quantmark.models] quantized in 5.0 s",
                                        "[quantmark.qsl] warning: cache rebuilt"]
