from .graph import Graph, Guard, Node, Value

__all__ = ["Graph", "Guard", "Node", "Value"]
