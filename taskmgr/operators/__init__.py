"""The operators of a task's chain (`build_operator_chain`), sources and sinks."""

from taskmgr.operators.chain import OperatorChain, build_operator_chain
from taskmgr.operators.sinks import VerifyingSink

__all__ = ["OperatorChain", "VerifyingSink", "build_operator_chain"]
