from .graph import Graph, Guard, Node, Value, covering

__all__ = ["Graph", "Guard", "Node", "Value", "covering"]
