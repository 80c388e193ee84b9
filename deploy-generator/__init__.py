"""collapsar.deploy owns turning a topology into Docker Compose and Swarm stack files. (Lands with the Docker issue.)
"""
