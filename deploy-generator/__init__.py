"""collapsar.deploy (folder deploy-generator/): a topology -> Docker Compose and
Docker Swarm stack files.

Owns: the names and labels that tie containers to an experiment and the
mark a shaped container gets (`naming`, which the container-mode manager
reads too), sizing and checking the experiment network's subnet (`subnet`,
whose `parse_subnet` the manager's addressing uses), and the generated files themselves (`stack`), with the
host directory or volume where the workload image's traces land.  Does not
own: running anything (the generated files are run by `docker compose` /
`docker stack deploy`; the manager in container mode lives in
collapsar.manager.container), nor the images (docker/).

Pure: nothing here talks to Docker or touches the system.
"""
