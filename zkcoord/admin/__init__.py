"""What an operator reads and changes from outside the running roles: a group's description and the group list
(``zkcoord group ...``).
"""
