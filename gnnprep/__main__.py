from gnnprep.cli import main

main()
