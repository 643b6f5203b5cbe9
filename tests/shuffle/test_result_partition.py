"""ResultPartition: what it refuses (spec 2.3)."""

import pytest



async def test_emit_after_finish_is_refused(credit_flow):
    h = await credit_flow()
    h.finish()
    with pytest.raises(RuntimeError, match="already finished"):
        await h.emit(0, 10)
